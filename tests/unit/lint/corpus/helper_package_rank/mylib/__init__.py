# Modelled on a training repository's package marker.
