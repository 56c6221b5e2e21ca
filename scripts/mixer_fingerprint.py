# Temporary wrapper (the lead removes it at merge): the tool is tests/fingerprint.py,
# run as `python -m tests.fingerprint` from the repository root.
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.fingerprint import main
sys.exit(main())
