"""Validate the agent's GraphQL documents against the sandbox W&B server's schema.

W&B's schema is not public. The sandbox's SDL (`launch_agent/sandbox/wandb/schema.py`) is
written from the operations the real wandb 0.31.0 client sends, and its golden test proves it
accepts every one of them, so it cannot drift into agreeing only with our own documents. These
tests check the other direction: every document the agent builds, batched ones included,
validates against it with its variables coerced. One SDL serves both: a second copy in the
product would only be a second thing to keep in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from graphql import GraphQLSchema, OperationDefinitionNode, parse, print_ast, validate
from graphql.error import GraphQLError
from graphql.execution.values import get_variable_values

from launch_agent.sandbox.wandb.schema import build


@cache
def schema() -> GraphQLSchema:
    return build()


def normalize(document: str) -> str:
    """The document printed canonically: equal for documents that differ only in layout."""
    return print_ast(parse(document))


def check(document: str, variables: Mapping[str, Any] | None = None) -> list[str]:
    """Problems of `document` (and of `variables` for it) against the SDL; empty when valid."""
    try:
        ast = parse(document)
    except GraphQLError as exc:
        return [f"syntax: {exc.message}"]
    problems = [error.message for error in validate(schema(), ast)]
    if problems or variables is None:
        return problems
    for definition in ast.definitions:
        if isinstance(definition, OperationDefinitionNode):
            coerced = get_variable_values(
                schema(), definition.variable_definitions or (), dict(variables)
            )
            if isinstance(coerced, list):
                problems.extend(f"variables: {error.message}" for error in coerced)
            declared = {v.variable.name.value for v in definition.variable_definitions or ()}
            extra = sorted(set(variables) - declared)
            if extra:
                problems.append(f"variables: not declared by the document: {extra}")
    return problems
