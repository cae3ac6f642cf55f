"""Dreamweaver: compositional world models from pixels (Recurrent Block-Slot Units)."""
