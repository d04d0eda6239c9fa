"""Reliability harnesses: random SIGKILL (kill.py) and concurrent runs, measured."""
