"""One package per served model (``models/<model>/``): its stage models and plugin."""
