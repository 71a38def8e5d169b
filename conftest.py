"""Root conftest: registers the example models (``models/``) so the suite and the tests see them.

A user's own project does the same with its models: import the module that registers them.
"""

import models  # noqa: F401  (registration happens on import)
