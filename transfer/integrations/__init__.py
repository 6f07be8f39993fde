"""Integrations with other tools, their heavy dependencies imported only when used: Ray
(``ray_executor``).  An outside tuner's integration lives in its own folder under
``tunedb.transfer.tuners`` (``kernel_tuner``, ``tvm``, ``triton``, ``serving``)."""
