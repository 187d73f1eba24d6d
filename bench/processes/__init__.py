"""One build's benchmark in a fresh process, driven request by request (the worker and its protocol)."""
