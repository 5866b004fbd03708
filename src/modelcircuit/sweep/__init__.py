"""`modelcircuit sweep` (optional extra [sweep]); heavy dependencies are imported lazily."""
