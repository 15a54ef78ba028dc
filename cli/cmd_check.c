/* cli/cmd_check.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_check(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("check", "this command is not built yet");
}
