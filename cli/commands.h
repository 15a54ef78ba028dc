/* cli/commands.h — one entry point per `ulpscope <command>`; each lives in
 * cli/cmd_<command>.c and returns the process exit status. */
#ifndef ULPSCOPE_CLI_COMMANDS_H
#define ULPSCOPE_CLI_COMMANDS_H

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cli_command;

int cmd_accum(int argc, char **argv);
int cmd_norms(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_noise(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
