"""Plan -> standalone PyTorch script (docs/design.md, "Layout": ``codegen/``).

``generate_source(g, order)`` / ``export_script(g, order, path)`` write a script that needs only torch:
``run(tensors, device) -> outputs`` executes the graph's ops in the schedule's order with each
storage freed where the simulator frees it, and its ``__main__`` measures peak memory and time next
to the simulator's prediction.  ``core.codegen.verify`` runs a model eagerly and through its
exported script and compares outputs and peaks.
"""

from .emit import CodegenError, export_script, generate_source

__all__ = ["CodegenError", "export_script", "generate_source"]
