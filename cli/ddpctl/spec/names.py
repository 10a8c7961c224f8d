"""Kubernetes' name rules, as the API server applies them: DNS labels and subdomains, label keys
and values, env names, images, modules, resource names. Each check names the field and the fix."""

from __future__ import annotations

import re

from ddpctl.errors import SpecError


class LazyPattern:
    """A regular expression compiled on its first match, with `re.Pattern`'s `pattern`,
    `fullmatch` and `search`. A render checks a few of the names below; compiling every one of
    them at import took ~1 ms of each start-up."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return re.fullmatch(self.pattern, text)  # compiled once: re caches it

    def search(self, text: str) -> re.Match[str] | None:
        return re.search(self.pattern, text)


MAX_DNS_LABEL = 63
DNS1123_LABEL = LazyPattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = LazyPattern(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = LazyPattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = LazyPattern(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = LazyPattern(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = LazyPattern(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


# A Kubernetes resource quantity (the API's own grammar, minus signs and E-notation with capitals).
QUANTITY = LazyPattern(
    r"^(?P<number>[+]?[0-9]+(\.[0-9]*)?|[+]?\.[0-9]+)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$"
)


IMAGE = LazyPattern(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
MODULE = LazyPattern(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
RESOURCE_NAME = LazyPattern(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
CONTROL_CHARS = LazyPattern(r"[\x00-\x1f\x7f]")
SECRET_KEY = LazyPattern(r"^[-._a-zA-Z0-9]+$")


def check_dns_label(field_name: str, value: str, *, rfc1035: bool = False) -> None:
    """Kubernetes object names that become hostnames or Service names are DNS labels."""
    pattern = DNS1035_LABEL if rfc1035 else DNS1123_LABEL
    kind = "DNS-1035 label" if rfc1035 else "DNS-1123 label"
    if not isinstance(value, str) or not value:
        raise SpecError(field_name, "must not be empty", "give a lowercase name such as 'resnet-ddp'")
    if len(value) > MAX_DNS_LABEL:
        raise SpecError(
            field_name, f"{value!r} is {len(value)} characters, the limit is {MAX_DNS_LABEL}", "use a shorter name"
        )
    if not pattern.fullmatch(value):
        start = "a lowercase letter" if rfc1035 else "a lowercase letter or digit"
        raise SpecError(
            field_name,
            f"{value!r} is not a valid {kind}",
            f"use lowercase letters, digits and '-', starting with {start} and ending with a letter or digit",
        )


def check_dns_subdomain(field_name: str, value: str) -> None:
    """Names of PVCs, PriorityClasses and ServiceAccounts: DNS-1123 subdomains (253 characters)."""
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise SpecError(
            field_name,
            f"{value!r} is not a valid name",
            "use lowercase letters, digits, '-' and '.', at most 253 characters",
        )


def check_label_key(field_name: str, key: str) -> None:
    """Label and annotation keys: an optional DNS-subdomain prefix and a 63-character name."""
    if not isinstance(key, str) or not key:
        raise SpecError(field_name, "a key must not be empty", "use keys like 'team' or 'example.com/team'")
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise SpecError(
            field_name, f"key {key!r} has an invalid prefix", "the prefix must be a lowercase DNS subdomain"
        )
    if len(name) > MAX_DNS_LABEL or not LABEL_NAME.fullmatch(name):
        raise SpecError(
            field_name,
            f"key {key!r} is not a valid label key",
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        )


def check_label_value(field_name: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > MAX_DNS_LABEL or not LABEL_VALUE.fullmatch(value):
        raise SpecError(
            field_name,
            f"{value!r} is not a valid label value",
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        )
