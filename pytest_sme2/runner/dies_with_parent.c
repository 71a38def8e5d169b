/* dies_with_parent PARENT_PID COMMAND [ARG...]
 *
 * Exec COMMAND with SIGKILL armed for when the thread that started this process ends
 * (PR_SET_PDEATHSIG, kept across exec), so a runner or qemu never outlives a pytest killed with
 * -9. If PARENT_PID is no longer this process's parent, the parent died before the signal was
 * armed and would never send it: exit 1 at once.
 *
 * Why a program and not Python's preexec_fn: a preexec_fn makes subprocess fork() the whole
 * session (torch and ExecuTorch loaded: 39 ms a process, measured) where it otherwise uses
 * vfork() (1 ms with this program in between), and a session starts hundreds of runners.
 *
 * If COMMAND cannot be executed, the last line on stderr is "dies_with_parent: exec errno N"
 * and the exit status 127, which pytest_sme2.runner.dies_with_parent turns back into the
 * OSError that starting COMMAND directly would have raised.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: dies_with_parent PARENT_PID COMMAND [ARG...]\n");
    return 2;
  }
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    fprintf(stderr, "\ndies_with_parent: exec errno %d\n", errno);
    return 127;
  }
  if (getppid() != (pid_t)strtol(argv[1], NULL, 10)) {
    return 1;
  }
  execvp(argv[2], argv + 2);
  fprintf(stderr, "\ndies_with_parent: exec errno %d\n", errno);
  return 127;
}
