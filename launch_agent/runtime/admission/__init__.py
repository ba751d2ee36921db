"""The admission stage: one interface (`stage.AdmissionStage`) the poller and the dispatcher
call, behind which `max_jobs` (`slots`), the agent's quota tree (`quota`, driven by
`quota_driver`) and Kueue (`kueue`) are interchangeable. The quota tree's parts are small units
of their own: the pending caps (`gate`), the stamp-ordering buffer (`ordering`) and the restart
rebuild (`rebuild`)."""
