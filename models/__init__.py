"""The built-in example models; importing this package registers them all.

Each module registers one model with :func:`pytest_sme2.export.model_spec.register_model`; its
docstring says what the model stresses in a profile.
"""

from models import mobilenet_v3_small, squeezesam_like, tiny_llama, toy_cnn, vit_tiny

__all__ = ["mobilenet_v3_small", "squeezesam_like", "tiny_llama", "toy_cnn", "vit_tiny"]
