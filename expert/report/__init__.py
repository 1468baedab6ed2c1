"""The diagnosis report: its data model, explanations (why / how / why not / what if) and renderers per format."""
