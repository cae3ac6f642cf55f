"""iclr_ray: ICLR 2025 papers as runnable, scalable reproduction studies on Ray."""

__version__ = "0.1.0"
