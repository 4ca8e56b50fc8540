module vscodeuiapp

go 1.21
