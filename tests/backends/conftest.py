"""Back-end tests: the mask and shape cases of test_masks.py and test_accuracy.py are shared
(test_compiled.py runs the compiled back ends over them), so this folder is importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
