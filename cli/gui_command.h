#ifndef DSPLAN_CLI_GUI_COMMAND_H_
#define DSPLAN_CLI_GUI_COMMAND_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

/// `dsplan gui [ARGS...]`: starts dsplan-gui from the folder of the dsplan binary, passing
/// ARGS on (docs/gui.md); its runner calls RunGuiCommand with them.
DeclaredCommand AddGuiCommand(CLI::App& app);

/// The dsplan-gui program beside |dsplan_exe| (the running binary's path), or "" when it is not
/// there (the GUI is built only where Qt 6 is installed).
std::string GuiProgramBeside(const std::string& dsplan_exe);

/// Replaces this process with dsplan-gui; returns only when that cannot be done (the error
/// line printed, exit code 2).
int RunGuiCommand(const std::vector<std::string>& args);

}  // namespace dsplan

#endif  // DSPLAN_CLI_GUI_COMMAND_H_
