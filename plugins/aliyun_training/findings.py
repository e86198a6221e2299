"""Findings and the one report that lists them all.

Every check runs, then the report shows every finding at once: a user fixes three problems in one
round instead of discovering them one failed run at a time. The preflight checks and the image and
bandwidth verdicts both speak in findings, so they live below both.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Verdict(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"


class Finding(BaseModel):
    """What one check found and, when it is not a PASS, what to do about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    verdict: Verdict
    found: str
    fix: str = ""

    @classmethod
    def failed_with(cls, check: str, error: Exception, default_fix: str) -> Finding:
        """The failing finding of a check that could not run: an error's message in this package
        ends with its fix, ``... (fix: ...)``, which goes to ``fix``; else ``default_fix`` does."""
        found, _, fix = str(error).partition(" (fix: ")
        return cls(check=check, verdict=Verdict.FAIL, found=found, fix=fix.removesuffix(")") or default_fix)


class NotApplicable(BaseModel):
    """A check that did not run, and why: it does not apply to the run's backend, or the run asked to
    skip preflight. The report lists it so a skipped check is never mistaken for a passed or failed one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    reason: str


class PreflightReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    findings: list[Finding]
    not_applicable: list[NotApplicable] = Field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.verdict is Verdict.FAIL for f in self.findings)

    def render(self) -> str:
        """A fixed-width table, one finding per line, fixes indented under the finding; then a SKIP
        line per check that did not run, with why."""
        checks = [f.check for f in self.findings] + [n.check for n in self.not_applicable]
        width = max(map(len, checks), default=0)
        lines = []
        for f in self.findings:
            lines.append(f"{f.verdict.value:<4}  {f.check:<{width}}  {f.found}")
            if f.fix and f.verdict is not Verdict.PASS:
                lines.append(f"{'':<4}  {'':<{width}}  fix: {f.fix}")
        lines += [f"SKIP  {n.check:<{width}}  {n.reason}" for n in self.not_applicable]
        return "\n".join(lines)
