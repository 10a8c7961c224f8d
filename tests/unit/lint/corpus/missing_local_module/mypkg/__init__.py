# Modelled on facebookresearch/detr util/__init__.py: a local package marker.
