/* cli/cmd_plan.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("plan", "this command is not built yet");
}
