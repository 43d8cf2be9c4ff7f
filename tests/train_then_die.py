"""``python tests/train_then_die.py ITER -opt FILE.yml``: the training launcher, SIGKILLed by itself right after
its iteration-ITER training state is saved (the resume tests' kill point, chosen by the test, not by a race)."""
import os
import signal
import sys

from basicsr.models.base_model import BaseModel

from tola_plugin import train  # registers the plugin and its save_training_state


def main():
    kill_at = int(sys.argv.pop(1))
    save = BaseModel.save_training_state

    def save_then_die(self, epoch, current_iter):
        save(self, epoch, current_iter)
        if current_iter == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    BaseModel.save_training_state = save_then_die
    train.main()


if __name__ == '__main__':
    main()
