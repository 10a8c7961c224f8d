# Modelled on facebookresearch/moco moco/__init__.py: an empty package marker.
