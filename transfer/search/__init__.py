"""Search: the seeded tuner and what it is built from.

``tuner`` (``Tuner``, ``TuneOptions``, ``TuneResult``: the loop, the budget, the commits, the
confirmation of the leaders), ``proposals/`` (every reason to evaluate a config, one source per
module behind one interface and a registry), ``adapt`` (neighbours' configs mapped into this
space), ``seed_order`` (seed order by hardware similarity), ``rgpe`` (the RGPE transfer
surrogate), ``costmodel``/``trees``/``lgbm_capi``/``modelcache`` (the LightGBM cost model, its
numpy evaluation and its persisted base model), ``scheduler`` (the budget across a model's
tasks) and ``runlog`` (run summaries stored beside the records).  The schedule space itself is
``tunedb.transfer.space``.
"""
