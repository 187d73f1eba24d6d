"""The release version of the wheel and of the C++ package (both read this line)."""

__version__ = "0.1.0"
