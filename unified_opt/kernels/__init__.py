"""Own updates at kernel speed: a spec's ``update`` traced into a program
(:mod:`.trace`), compiled to code for a small VM (:mod:`.bytecode`) and run by that VM
(``vm.cc``, built once per machine by :mod:`.build`) over a framework's arrays in place
(:mod:`.runtime`). The math stays in the spec: the VM only knows elementwise operations,
sums and stores. numpy only; no framework is imported here."""
