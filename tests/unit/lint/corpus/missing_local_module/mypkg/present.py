# Modelled on facebookresearch/detr util/misc.py: a helper module that is present.
def run(fn):
    return fn
