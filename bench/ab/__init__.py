"""Two builds measured in one run: the scratch checkout and build, the driver of their worker pairs, confirmation."""
