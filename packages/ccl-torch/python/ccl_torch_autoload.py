"""Entry point of the `torch.backends` group: torch runs register() at the end of `import torch`, so that
init_process_group("ccl") works without importing the bindings.

A top-level module on purpose: an entry point inside oneccl_bindings_for_pytorch would import that package's
__init__ before register() could guard it, and one broken plugin must never break `import torch`.
Any failure becomes a warning; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns autoloading off."""


def register():
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401  (registers 'ccl' on import)
    except Exception as e:  # noqa: BLE001
        import warnings

        warnings.warn(f"ccl-torch: the 'ccl' backend could not be registered: {e}", RuntimeWarning, stacklevel=2)
