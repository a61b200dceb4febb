"""Entry point of the `torch.backends` group: torch runs it at the end of `import torch`, so that
init_process_group("ccl") works without importing us. It must never break `import torch`: any failure
becomes a warning (TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns autoloading off)."""


def register():
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401  (registers on import)
    except Exception as e:  # noqa: BLE001
        import warnings

        warnings.warn(f"ccl-torch: the 'ccl' backend could not be registered: {e}", RuntimeWarning, stacklevel=2)
