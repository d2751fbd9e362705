// The dsplan binary's main: everything else is in DsplanMain (cli/main.cc).
#include "cli/dsplan_main.h"

int main(int argc, char** argv) { return dsplan::DsplanMain(argc, argv); }
