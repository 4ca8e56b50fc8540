module vscodeuirec

go 1.21
