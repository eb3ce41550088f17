"""Stock Realtime client libraries driven against an omniduplex server.

``report`` holds what every driver shares (the columns, the report, the target, speech);
each other module drives one client library through its public API.
"""
