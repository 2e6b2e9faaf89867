"""Presentation of audit results (plots). May import matplotlib and app.audit; never web or database code."""
