"""The diagnosis report: its data model (`model`), explanations (`explain`: why / how / why not / what if /
counterfactuals) and one renderer per format (`render`).

Importing the package binds the explanations to the Report's methods (`report.why(...)`), so the model stays below
the explanations in the layering. The explanation modules are imported on the first call, not here: a command that
only diagnoses and renders never pays for them.
"""

from collections.abc import Callable
from typing import Any

from .model import Explanations, bind_explanations


def _on_first_call(name: str) -> Callable[..., Any]:
    """The explanation `name`, imported from expert.report.explain when it is first called."""

    def call(*args: Any) -> Any:
        from . import explain

        return getattr(explain, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


bind_explanations(Explanations(why=_on_first_call("why"), how=_on_first_call("how"),
                               why_not=_on_first_call("why_not"), what_if=_on_first_call("what_if"),
                               counterfactuals=_on_first_call("counterfactuals")))
