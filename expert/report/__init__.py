"""The diagnosis report: its data model (`model`), explanations (`explain`: why / how / why not / what if /
counterfactuals) and one renderer per format (`render`).

Importing the package binds the explanations to the Report's methods (`report.why(...)`), so the model stays below
the explanations in the layering.
"""

from .explain import counterfactuals, how, what_if, why, why_not
from .model import Explanations, bind_explanations

bind_explanations(Explanations(why=why, how=how, why_not=why_not, what_if=what_if, counterfactuals=counterfactuals))
