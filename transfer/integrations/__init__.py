"""Integrations with other tools, their heavy dependencies imported only when used: TVM
MetaSchedule (``tvm_db``: a MetaSchedule database backed by tunedb; ``tvm_search``: measuring
the nearest entries' adapted schedules; ``tvm_models``: tuning a Relax model), Kernel Tuner
(``kt_strategy``: ``WarmStart`` and ``Recorder``, public as ``tunedb.kernel_tuner``) and Ray
(``ray_executor``)."""
