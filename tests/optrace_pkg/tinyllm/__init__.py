"""A small model package in the shape of sglang's: model code in ``models/``, library layers in
``layers/``, custom kernels imported by platform. layerc's optrace golden tests read it; it is
never imported or run."""
