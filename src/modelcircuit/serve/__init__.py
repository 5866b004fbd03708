"""`modelcircuit serve` (optional extra [serve]); heavy dependencies are imported lazily."""
