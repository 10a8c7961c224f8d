# Modelled on a helper module that is present.
def run(fn):
    return fn
