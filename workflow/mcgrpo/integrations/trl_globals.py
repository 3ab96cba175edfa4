"""A TRL script arm held to the process's global state, as mcgrpo's plugins are (mcgrpo.train.contract).

The script, its reward functions and its callbacks run in the train job's process, where mcgrpo also evaluates the
arm: a setting they leave changed (torch's default dtype, threads, deterministic algorithms, float32 matmul precision,
a kernel flag, numpy's error handling, the working folder, sys.path, os.environ) would train and evaluate this arm
otherwise than the arms it is compared with, and nothing would say so. `Held` reads that state (contract's own reading,
`settings`) once the recipe's GRPOConfig is built, so what transformers sets for the recipe's own arguments is the
arm's starting state, and refuses a change of it after the script's import, after trainer(setup), and before and after
every step (docs/trl.md). What transformers sets for a GRPOConfig of the script's (tf32, full_determinism,
torch_compile) is the script's change, refused as well. So is a patch of the code the run computes with
(mcgrpo.train.patches: `import unsloth`, liger-kernel's apply_liger_kernel_to_*, a function of torch replaced), as a
plugin's is.
"""

from __future__ import annotations

from mcgrpo.core.errors import ConfigError
from mcgrpo.train import contract, patches

ALLOWED = ("the process's global state as the script found it (torch's settings and kernel flags, numpy's error "
           "handling, the working folder, sys.path but appending, os.environ but adding), which this arm trains and is "
           "evaluated under and the arms it is compared with are not: set what a computation needs inside it and "
           "restore it there (try/finally, or a context manager: torch.no_grad(), np.errstate()); a GRPOConfig setting "
           "that makes transformers set one (tf32, full_determinism, torch_compile) is refused with it (docs/trl.md)")


class Held:
    """The process's global state as a script arm's run starts it, which the script's code must leave so, and the
    code the run computes with (`code`: a patches.held block open for the whole run, the script's import in it)."""

    def __init__(self, script: str, code: patches.Held):
        self.script, self.state, self.code = script, contract.settings(), code

    def check(self, doing: str, when: str = "") -> None:
        """Refuse a change since the run started, made by what the script was `doing` ('importing it'); `when`
        prefixes the message as the protocol's step checks do ('in step 3: ')."""
        changed = contract.setting_changed(self.state, contract.settings())
        if changed:
            raise ConfigError(f"{when}trainer.trl.script {self.script}: {doing} changed {changed} and left it so; "
                              f"allowed: {ALLOWED}")
        patched = self.code.changed()
        if patched:
            raise ConfigError(f"{when}trainer.trl.script {self.script}: {doing} patched {patched} and left it so; "
                              f"allowed: {contract.PATCHED}")
