# Modelled on openai/gpt-oss gpt_oss/torch/__init__.py: the package marker of the helper below.
