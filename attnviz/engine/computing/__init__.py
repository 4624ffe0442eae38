"""Computing: the layers, the families' named steps, the forward pass and its trace, patterns, long texts, generation. No Qt."""

import os

# numba's coloured error text (colorama's init/deinit) reassigns sys.stderr from whichever thread
# compiles, and a warm-up thread compiles beside the app's own output: plain text instead (numba
# reads this once, when first imported: here, before any module of this package imports it)
os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
