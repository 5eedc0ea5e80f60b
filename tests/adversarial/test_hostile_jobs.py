"""(b) of issue 21: the attacker's jobs, on real agents and real containers.

Each attack is a job of tenant ``other`` that ends in exactly one terminal state;
after it every check of :mod:`tests.adversarial.after` holds.
"""

from __future__ import annotations

import pytest

from tests.adversarial.after import check_all
from tests.adversarial.stack import ATTACKER, VICTIM, Hostile, sh_job

pytestmark = pytest.mark.integration


def test_the_attacker_cannot_read_the_victims_jobs(hostile: Hostile) -> None:
    victim_job = hostile.submit_as(VICTIM, sh_job("echo mine", name="victim-private"))
    hostile.wait_settled(VICTIM, [victim_job])
    attacker_job = hostile.submit_as(ATTACKER, sh_job("echo theirs", name="attacker"))
    hostile.wait_settled(ATTACKER, [attacker_job])
    check_all(hostile)
