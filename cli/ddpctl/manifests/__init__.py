"""Pure views of a planned spec: Kubernetes objects (Jinja2 templates), their output formats,
`render --explain`, Helm values and the commented ddp.yaml."""
