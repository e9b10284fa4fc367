"""The ``tpu-export`` command line."""
