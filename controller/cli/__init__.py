"""The ``infrarsi`` command line. Each verb lives in its own module and is loaded lazily."""
