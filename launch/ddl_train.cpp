// ddl_train: trains a registered model on an HDF5 image dataset, on one process or, under mpirun, as a
// grid of ranks (launch/train/train_main.cpp).
#include "launch/train/train_main.hpp"

int main(int argc, char** argv) { return ddl::train_main(argc, argv, {}); }
