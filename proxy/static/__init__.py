"""Static files of the gateway page (a package so that the wheel ships them)."""
