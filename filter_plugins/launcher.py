"""Filters for the training launcher (templates/train.sh.j2, train.env.j2, rendered by the train role).

The launcher runs as root's chosen training user with values taken from
inventory and -e, so nothing a user sets may become shell code or Hydra
syntax. Two filters do that, and tools/render.py and the preflight role call
the same functions, so a bad name is refused before anything changes:

- launcher_env_problems / launcher_env: environment variable names must be
  shell names (train.env writes `export NAME=...`, and NAME is not quoted);
  values must be scalars (train.env quotes them for bash).
- hydra_value: a Python value as the text of one Hydra override value, so that
  after Hydra's parser and OmegaConf's interpolation the config holds exactly
  the value given. train.sh quotes the whole `key=value` for bash on top.
  "${" is refused: no escape of it survives verl's OmegaConf.resolve.
- verl_loggers: train_logger holds only loggers of verl's whose package the
  env installs (console, tensorboard, wandb), console among them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Strings made only of these characters go to Hydra unquoted, so Hydra types
# them as it types a command-line value: `-e train_batch_size=64` hands over
# the string "64", and verl must get the number 64. All of them are characters
# Hydra's lexer takes in an unquoted value (its ID and UNQUOTED_CHAR tokens,
# and ':'); anything else is quoted.
_PLAIN = re.compile(r"^[A-Za-z0-9_./:@%+-]+$")
# OmegaConf reads "???" as a mandatory value that is missing; no quoting or
# escaping makes it a string.
_OMEGACONF_MISSING = "???"
# Backslashes before a quote or at the end of a quoted Hydra value are escapes.
_BEFORE_QUOTE = re.compile(r"(\\*)'")
_AT_END = re.compile(r"(\\*)$")


def launcher_env_problems(env: Any, variable: str) -> list[str]:
    """What is wrong with an env mapping for train.env, as messages naming `variable`; [] when fine."""
    if env is None:
        return []
    if not isinstance(env, Mapping):
        return [f"{variable} should be a mapping of variable names to values, not {type(env).__name__}"]
    problems = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            problems.append(
                f"{variable}: {name!r} is not an environment variable name; use letters, digits and _, "
                "not starting with a digit (e.g. HF_HOME)"
            )
        elif value is None or isinstance(value, (Mapping, list, tuple, set)):
            problems.append(f"{variable}.{name} is {value!r}; give a string or a number ('' for an empty value)")
    return problems


def launcher_env(env: Any, variable: str) -> Mapping[str, Any]:
    """The env mapping, unchanged, or an error naming `variable` and each bad name."""
    problems = launcher_env_problems(env, variable)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return env or {}


def _line_breaks(text: str) -> bool:
    # The validator reads `train.sh --print-overrides` one override per line
    # (str.splitlines), and Hydra has no escape for a line break.
    return "\x00" in text or text.splitlines() not in ([], [text])


def _hydra_string(text: str, key: str) -> str:
    if text == _OMEGACONF_MISSING:
        raise AnsibleFilterError(f"{key}: OmegaConf reads '???' as a missing value; it cannot be passed as text")
    if _line_breaks(text):
        raise AnsibleFilterError(f"{key}: the value {text!r} holds a line break or NUL; give it on one line")
    if "${" in text:
        # OmegaConf would resolve it as an interpolation. Escaping it (\${) is not
        # enough: verl 0.4.1 resolves its config in place (OmegaConf.resolve in
        # main_ppo's TaskRunner.run), which strips the escape, and every later read
        # interpolates; a key that refers to this one (critic.model.tokenizer_path
        # to actor_rollout_ref.model.path) loses a second escape the same way.
        raise AnsibleFilterError(
            f"{key}: the value {text!r} holds '${{', which OmegaConf reads as an interpolation and no "
            "escape survives verl's own OmegaConf.resolve; remove it (to refer to another key on "
            "purpose, write the override in train_extra_overrides)"
        )
    if _PLAIN.fullmatch(text):
        return text
    # Hydra, inside '...': a quote is \', and backslashes in front of a quote
    # or of the closing quote are doubled; other backslashes are literal.
    text = _BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + "\\'", text)
    text = _AT_END.sub(lambda m: m.group(1) * 2, text, count=1)
    return "'" + text + "'"


def hydra_value(value: Any, key: str = "value") -> str:
    """A value as Hydra override text: true/false, null, numbers, [a,b], strings quoted unless plain.

    `key` names the override in error messages.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return _hydra_string(str(value), key)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item, key) for item in value) + "]"
    raise AnsibleFilterError(f"{key}: {value!r} is a {type(value).__name__}; give a string, number, boolean or list")


# verl 0.4.1's loggers (Tracking.supported_backend, verl/utils/tracking.py); verl
# asserts that each name of trainer.logger is one of them when training starts.
VERL_LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml")
# Those the env can run: the package verl imports for each is pinned in
# roles/verl/files/requirements-verl-0.4.1.txt (tensorboard through
# torch.utils.tensorboard; wandb is a dependency of verl's). The others' packages
# are not installed, so verl would stop at their import after Ray has started.
ENV_LOGGERS = {"console": None, "tensorboard": "tensorboard", "wandb": "wandb"}


def verl_logger_problems(loggers: Any, variable: str = "train_logger") -> list[str]:
    """What is wrong with a train_logger list, as messages naming `variable`; [] when fine."""
    usable = ", ".join(ENV_LOGGERS)
    if not isinstance(loggers, (list, tuple)) or not all(isinstance(name, str) for name in loggers):
        return [f"{variable} should be a list of verl's logger names ({usable}), not {loggers!r}"]
    problems = []
    for name in loggers:
        if name in ENV_LOGGERS:
            continue
        if name in VERL_LOGGERS:
            problems.append(
                f"{variable}: verl's {name!r} logger needs a package the env does not install (it is not in "
                f"roles/verl/files/requirements-verl-0.4.1.txt); use {usable}"
            )
        else:
            problems.append(f"{variable}: {name!r} is not one of verl 0.4.1's loggers; use {usable}")
    if "console" not in loggers:
        problems.append(
            f"{variable} must keep console: train.sh --report and the smoke test read the step lines "
            "the console logger prints"
        )
    return problems


def verl_loggers(loggers: Any, variable: str = "train_logger") -> list[str]:
    """The train_logger list, unchanged, or an error naming `variable` and each bad name."""
    problems = verl_logger_problems(loggers, variable)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return list(loggers)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "launcher_env": launcher_env,
            "launcher_env_problems": launcher_env_problems,
            "hydra_value": hydra_value,
            "verl_loggers": verl_loggers,
            "verl_logger_problems": verl_logger_problems,
        }
