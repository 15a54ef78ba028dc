/* cli/cmd_norms.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_norms(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("norms", "this command is not built yet");
}
