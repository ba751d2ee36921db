"""`python -m launch_agent` is the same as the `launch-agent` command."""

from launch_agent.cli import main

raise SystemExit(main())
