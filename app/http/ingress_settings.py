"""What the HTTP ingress is given: its limits, its part of the jobs' settings, auth and readiness, and the
public view of the settings that /v1/info shows; nothing it would have to ignore."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from app.config import Limits, Settings
from app.settings.jobs import Jobs


@dataclass(frozen=True)
class IngressSettings:
    limits: Limits  # the upload's size and read deadline
    max_inflight_requests: int
    page_retries: int
    structure_mode: str  # a page's structure where its request set none
    jobs: Jobs
    readiness_refresh_s: float
    readiness_timeout_s: float
    api_keys_file: Optional[str]  # None: the API is open
    public: dict  # the settings as /v1/info shows them to any key holder

    @classmethod
    def of(cls, settings: Settings) -> "IngressSettings":
        return cls(limits=settings.limits, max_inflight_requests=settings.max_inflight_requests,
                   page_retries=settings.page_retries, structure_mode=settings.structure.mode, jobs=settings.jobs,
                   readiness_refresh_s=settings.readiness.refresh_s, readiness_timeout_s=settings.readiness_timeout_s,
                   api_keys_file=settings.auth.api_keys_file, public=public_settings(settings))


def public_settings(settings: Settings) -> dict:
    """The settings for any key holder: where secrets and strangers' documents live is told as set or not.
    A store URL may carry a host, port or (against the docs) a password; its kind is enough here."""
    public = settings.model_dump()
    jobs, auth = public["jobs"], public["auth"]
    jobs["store"] = jobs["store"].split(":", 1)[0] if jobs["store"] else None
    for section, name in ((jobs, "redis_password_file"), (jobs, "redis_ca_file"), (auth, "api_keys_file")):
        if name in section:
            section[name] = "set" if section[name] else None
    return public
