"""Read-only analyses of a compiled graph: data for the backends, never a rewrite.

    memory_plan.py  tensor lifetimes -> offsets in one arena (GPU)
    streams.py      independent branches -> GPU streams and events
    cost.py         FLOPs, bytes, multipliers per node (inspect, profiles)
"""
