"""Security contexts of the container and of the pod: identities, seccomp, AppArmor, capabilities, SELinux,
sysctls."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator.api.common import ApiModel, Rule
from drafter_operator.api.pod.values import unique_names

ID = Annotated[int, Field(ge=0, le=2147483647)]
LOCAL_PROFILE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
CAPABILITY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
SELINUX_PATTERN = r"^[A-Za-z0-9_.:,-]+$"
SYSCTL_PATTERN = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"


def _profile_rules(field: str, what: str) -> tuple[Rule, ...]:
    return (
        Rule(
            cel="self.type == 'Localhost' || !has(self.localhostProfile)",
            message=f"{field}.localhostProfile is only for {field}.type Localhost: remove localhostProfile or set type: Localhost",
            check=lambda p: p.type == "Localhost" or p.localhost_profile is None,
            field_path=".localhostProfile",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.type != 'Localhost' || has(self.localhostProfile)",
            message=f"{field}.type Localhost needs {field}.localhostProfile: the {what} profile file on the node, e.g. profiles/engine.json",
            check=lambda p: p.type != "Localhost" or p.localhost_profile is not None,
            field_path=".localhostProfile",
            reason="FieldValueRequired",
        ),
    )


class SeccompProfile(ApiModel):
    """The seccomp filter of the container (or of every container of the pod)."""

    rules = _profile_rules("seccompProfile", "seccomp")

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    """RuntimeDefault (the container runtime's), Unconfined (none) or Localhost (a file on the node)."""
    localhost_profile: Annotated[str, StringConstraints(pattern=LOCAL_PROFILE_PATTERN, min_length=1, max_length=255)] | None = None
    """With type Localhost: the profile's path relative to the kubelet's seccomp directory."""


class AppArmorProfile(ApiModel):
    """The AppArmor profile of the container (or of every container of the pod)."""

    rules = _profile_rules("appArmorProfile", "AppArmor")

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    """RuntimeDefault (the container runtime's), Unconfined (none) or Localhost (a profile loaded on the node)."""
    localhost_profile: Annotated[str, StringConstraints(pattern=LOCAL_PROFILE_PATTERN, min_length=1, max_length=255)] | None = None
    """With type Localhost: the name of a profile loaded on the node."""


class Capabilities(ApiModel):
    """Linux capabilities added to or dropped from the container runtime's default set."""

    add: Annotated[list[Annotated[str, StringConstraints(pattern=CAPABILITY_PATTERN, max_length=64)]], Field(max_length=64)] | None = None
    """Capabilities to add, e.g. [IPC_LOCK]."""
    drop: Annotated[list[Annotated[str, StringConstraints(pattern=CAPABILITY_PATTERN, max_length=64)]], Field(max_length=64)] | None = None
    """Capabilities to drop, e.g. [ALL]."""


class SELinuxOptions(ApiModel):
    """The SELinux context of the container (or of every container of the pod)."""

    user: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux user, e.g. system_u."""
    role: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux role, e.g. system_r."""
    type: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux type, e.g. container_t."""
    level: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux level, e.g. s0:c123,c456."""


def _non_root_rule(field: str) -> Rule:
    return Rule(
        cel="!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || self.runAsUser != 0",
        message=f"{field}.runAsNonRoot true contradicts {field}.runAsUser 0 (the kubelet would refuse to start the container): remove one of them",
        check=lambda c: not c.run_as_non_root or c.run_as_user != 0,
        field_path=".runAsUser",
    )


class SecurityContext(ApiModel):
    """Security settings of the container (they override the pod's)."""

    rules = (
        Rule(
            cel="!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !has(self.privileged) || !self.privileged",
            message=(
                "securityContext.allowPrivilegeEscalation false contradicts securityContext.privileged true "
                "(Kubernetes refuses both): remove one of them"
            ),
            check=lambda c: c.allow_privilege_escalation is not False or c.privileged is not True,
            field_path=".allowPrivilegeEscalation",
        ),
        Rule(
            cel=(
                "!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !has(self.capabilities) || "
                "!has(self.capabilities.add) || !self.capabilities.add.exists(c, c in ['CAP_SYS_ADMIN', 'SYS_ADMIN'])"
            ),
            message=(
                "securityContext.allowPrivilegeEscalation false contradicts securityContext.capabilities.add SYS_ADMIN "
                "(Kubernetes refuses both): remove one of them"
            ),
            check=lambda c: c.allow_privilege_escalation is not False or c.capabilities is None or not any(
                cap in ("CAP_SYS_ADMIN", "SYS_ADMIN") for cap in c.capabilities.add or ()),
            field_path=".allowPrivilegeEscalation",
        ),
        _non_root_rule("securityContext"),
    )

    run_as_user: ID | None = None
    """UID the container's process runs as, e.g. 1000."""
    run_as_group: ID | None = None
    """GID the container's process runs as."""
    run_as_non_root: bool | None = None
    """Refuse to start the container as root (UID 0)."""
    privileged: bool | None = None
    """Run with all host devices and capabilities (rarely needed; GPUs do not need it)."""
    allow_privilege_escalation: bool | None = None
    """Whether a process may gain more privileges than its parent (setuid); false with privileged is refused."""
    read_only_root_filesystem: bool | None = None
    """Mount the container's root filesystem read-only."""
    capabilities: Capabilities | None = None
    """Capabilities to add or drop."""
    seccomp_profile: SeccompProfile | None = None
    """The seccomp filter."""
    app_armor_profile: AppArmorProfile | None = None
    """The AppArmor profile."""
    proc_mount: Literal["Default"] | None = None
    """/proc masking: only Default (Unmasked needs a pod with hostUsers false, which these pods are not)."""
    se_linux_options: SELinuxOptions | None = None
    """The SELinux context."""


class Sysctl(ApiModel):
    """A namespaced kernel parameter set for the pod."""

    name: Annotated[str, StringConstraints(pattern=SYSCTL_PATTERN, min_length=1, max_length=253)]
    """Parameter name, e.g. net.ipv4.tcp_keepalive_time (the kubelet allows only safe ones unless configured)."""
    value: Annotated[str, StringConstraints(max_length=256)]
    """Value to set."""


class PodSecurityContext(ApiModel):
    """Security settings of every container of the pod, and of its volumes."""

    rules = (_non_root_rule("securityContext"),)

    run_as_user: ID | None = None
    """UID every container's process runs as, e.g. 1000."""
    run_as_group: ID | None = None
    """GID every container's process runs as."""
    run_as_non_root: bool | None = None
    """Refuse to start any container as root (UID 0)."""
    fs_group: ID | None = None
    """GID that owns supporting volumes and is added to every container's groups."""
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    """When volume ownership is changed to fsGroup: OnRootMismatch (faster on big model volumes) or Always."""
    supplemental_groups: Annotated[list[ID], Field(max_length=32)] | None = None
    """Extra GIDs of every container's process."""
    seccomp_profile: SeccompProfile | None = None
    """The seccomp filter of every container."""
    app_armor_profile: AppArmorProfile | None = None
    """The AppArmor profile of every container."""
    sysctls: Annotated[
        list[Sysctl],
        Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
        AfterValidator(unique_names),
    ] | None = None
    """Namespaced kernel parameters, names unique."""
    se_linux_options: SELinuxOptions | None = None
    """The SELinux context of every container."""
