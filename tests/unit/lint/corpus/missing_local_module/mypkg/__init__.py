# Modelled on a package marker.
