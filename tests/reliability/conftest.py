import os
import sys

# The harness is also a command (`python -m tests.reliability.kill`): it imports the functional
# tests' helpers as `tests.functional...`, which needs the repository root on the path.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
